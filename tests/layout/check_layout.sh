#!/usr/bin/env bash
# Checks that the folders mean what docs/library.md's Layout says: include
# arrows run one way, and core never names a plug-in. Prints each violation
# as file:line: rule, and exits 1 if there is any.
#   core/, core/parallel/   include no plug-in folder and nothing of core/train/
#   core/train/             includes no plug-in folder
#   core/parallel/communication/
#                           includes nothing else of core/parallel/
#   core/parallel/ (its root: the contracts)
#                           includes no mode's folder; modes.cpp, where the
#                           modes register, aside
#   core/parallel/<mode>/   includes no other mode's folder but ddp/ (every
#                           mode keeps data-parallel replicas)
#   algorithms/, callbacks/, schedulers/
#                           include core/, core/parallel/'s root (the
#                           contracts), core/parallel/communication/ and
#                           their own folder (its subfolders included:
#                           algorithms/sam/) only: never a parallel mode's
#   core/ (every folder)    names no class or struct that a plug-in folder defines
set -uo pipefail
root=${1:?usage: check_layout.sh SOURCE_ROOT}
cd "$root" || exit 2
plugins=(algorithms callbacks schedulers)
plugin_pattern=$(IFS='|'; echo "${plugins[*]}")

sources() { find "$@" -type f \( -name '*.h' -o -name '*.cpp' \) 2>/dev/null | sort; }
# grep -n output ("file:line:text") becomes "file:line: rule".
as_violation() { sed -E "s|^([^:]+:[0-9]+):.*$|\1: $1|"; }

mapfile -t core_files < <(sources core)
mapfile -t below_train < <(find core -path core/train -prune -o -type f \( -name '*.h' -o -name '*.cpp' \) -print | sort)

violations=$(
  grep -nE "#include [<\"]basin/($plugin_pattern)/" "${core_files[@]}" /dev/null | as_violation "core includes a plug-in"
  grep -nE '#include [<"]basin/core/train/' "${below_train[@]}" /dev/null |
    as_violation "core/ and core/parallel/ include nothing of core/train/"

  parallel=core/parallel
  modes=(ddp zero zero3)
  mode_pattern=$(IFS='|'; echo "${modes[*]}")
  mapfile -t communication < <(sources $parallel/communication)
  [ ${#communication[@]} -gt 0 ] && grep -nE "#include [<\"]basin/$parallel/" "${communication[@]}" /dev/null |
    grep -vE "#include [<\"]basin/$parallel/communication/" |
    as_violation "core/parallel/communication/ includes nothing else of core/parallel/"
  mapfile -t contracts < <(find $parallel -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \) ! -name modes.cpp | sort)
  [ ${#contracts[@]} -gt 0 ] && grep -nE "#include [<\"]basin/$parallel/($mode_pattern)/" "${contracts[@]}" /dev/null |
    as_violation "core/parallel/'s root includes no mode's folder (modes.cpp aside)"
  for mode in "${modes[@]}"; do
    mapfile -t files < <(sources $parallel/$mode)
    [ ${#files[@]} -gt 0 ] || continue
    grep -nE "#include [<\"]basin/$parallel/($mode_pattern)/" "${files[@]}" /dev/null |
      grep -vE "#include [<\"]basin/$parallel/($mode|ddp)/" |
      as_violation "core/parallel/$mode/ includes no other mode's folder but ddp/"
  done

  for plugin in "${plugins[@]}"; do
    mapfile -t files < <(sources "$plugin")
    [ ${#files[@]} -gt 0 ] || continue
    grep -nE '#include [<"]basin/' "${files[@]}" /dev/null |
      grep -vE "#include [<\"]basin/(core|core/parallel|core/parallel/communication|$plugin(/[a-z0-9_]+)?)/[a-z0-9_]+\.h[>\"]" |
      as_violation "$plugin/ includes only core/, core/parallel/, core/parallel/communication/ and $plugin/"
  done

  # The types the plug-ins define (definitions, not forward declarations).
  mapfile -t plugin_types < <(sources "${plugins[@]}" |
    xargs -r grep -hoE '^\s*(class|struct)\s+[A-Z][A-Za-z0-9_]*\s*(final\s*)?[:{]' |
    sed -E 's/^\s*(class|struct)\s+([A-Za-z0-9_]+).*/\2/' | sort -u)
  if [ ${#plugin_types[@]} -gt 0 ]; then
    type_pattern="\\b($(IFS='|'; echo "${plugin_types[*]}"))\\b"
    # Comments and messages may mention a plug-in (SAM is why GroupSync exists); code may not.
    for file in "${core_files[@]}"; do
      sed -E 's|//.*$||; s/"([^"\\]|\\.)*"/""/g' "$file" | grep -noE "$type_pattern" |
        sed -E "s|^([0-9]+):(.*)$|$file:\\1: core names the plug-in type \\2|"
    done
  fi
)

if [ -n "$violations" ]; then
  echo "$violations"
  exit 1
fi
echo "layout: ${#core_files[@]} core files and the plug-ins keep the rules"
