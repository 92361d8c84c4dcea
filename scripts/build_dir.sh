# Sourced by the scripts: the build folder of the LibTorch BASIN_LIBTORCH names.
case "${BASIN_LIBTORCH:-debian}" in
  pypi) build_dir=build-torch-${BASIN_TORCH_VERSION:-2.11.0} ;;
  *) build_dir=build ;;
esac
