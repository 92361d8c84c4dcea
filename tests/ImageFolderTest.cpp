// "data": {"name": "image_folder"}: one folder per class of PNG or JPEG
// files, decoded by worker threads, resized and normalized by config keys;
// Python reads the same folder to the same samples, trains nothing twice,
// and gets back the model basin trained on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <ATen/ATen.h>
#include <zlib.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "basin/datasets/image_codec.h"
#include "basin/datasets/image_folder.h"
#include "python_models.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

namespace fs = std::filesystem;
const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kRun = BASIN_RUN_EXE;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// An image of `channels` with pixels drawn from `seed`.
Image random_image(int64_t height, int64_t width, int64_t channels, int64_t seed) {
  at::manual_seed(static_cast<uint64_t>(seed));
  const at::Tensor pixels = at::randint(0, 256, {height * width * channels}, at::kByte);
  return {height, width, channels, std::vector<uint8_t>(pixels.data_ptr<uint8_t>(), pixels.data_ptr<uint8_t>() + pixels.numel())};
}

/// [channels, height, width] floats in [0, 1] of `image`, computed in the test.
at::Tensor unit_pixels(const Image& image) {
  return at::tensor(std::vector<int64_t>(image.pixels.begin(), image.pixels.end()), at::kLong)
             .reshape({image.height, image.width, image.channels})
             .permute({2, 0, 1})
             .to(at::kDouble) /
         255.0;
}

ImageTransform transform(int64_t channels) {
  ImageTransform t;
  t.channels = channels;
  return t;
}

TEST(ImageFolderTest, ClassesAreTheSortedFoldersAndPixelsAreNormalizedPerChannel) {
  test::TempDir dir;
  const Image a = random_image(3, 2, 3, 1), b = random_image(3, 2, 3, 2), gray = random_image(3, 2, 1, 3);
  write_bytes(dir.file("train/zebra/1.png"), encode_png(a));
  write_bytes(dir.file("train/ant/b.PNG"), encode_png(b));
  write_bytes(dir.file("train/ant/a.png"), encode_png(gray));  // gray, read as RGB: each channel the gray
  write_bytes(dir.file("train/ant/notes.txt"), {1, 2, 3});      // not an image: skipped
  write_bytes(dir.file("train/.cache/x.png"), encode_png(a));   // hidden: skipped
  ImageTransform rgb = transform(3);
  rgb.mean = {0.5, 0.25, 0.0};
  rgb.std = {0.5, 0.5, 2.0};
  const ImageFolderSplit split = read_image_folder(dir.file("train"), "data.train", rgb, 2);
  EXPECT_EQ(split.classes, (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_TRUE(at::equal(split.data.targets(), at::tensor({0, 0, 1}, at::kLong)));
  const at::Tensor mean = at::tensor({0.5, 0.25, 0.0}, at::kDouble).reshape({3, 1, 1});
  const at::Tensor std = at::tensor({0.5, 0.5, 2.0}, at::kDouble).reshape({3, 1, 1});
  const at::Tensor expected = at::stack({(unit_pixels(gray).expand({3, 3, 2}) - mean) / std,
                                         (unit_pixels(b) - mean) / std, (unit_pixels(a) - mean) / std});
  ASSERT_EQ(split.data.inputs().sizes(), expected.sizes());
  EXPECT_LE((split.data.inputs().to(at::kDouble) - expected).abs().max().item<double>(), 1e-6);
  // Gray: one channel.
  const ImageFolderSplit one = read_image_folder(dir.file("train"), "data.train", transform(1), 1);
  EXPECT_TRUE(at::allclose(one.data.inputs()[0].to(at::kDouble), unit_pixels(gray), 0, 1e-7));
}

// Gray from colour as Pillow's convert("L"): ITU-R 601-2 luma, rounded.
TEST(ImageFolderTest, ColourBecomesTheLumaOfItsPixels) {
  const Image rgb = random_image(5, 7, 3, 11);
  const std::vector<uint8_t> png = encode_png(rgb);
  const Image gray = decode_image(png.data(), png.size(), 1);
  ASSERT_EQ(gray.pixels.size(), 35u);
  for (std::size_t i = 0; i < 35; ++i) {
    const double luma = 0.299 * rgb.pixels[3 * i] + 0.587 * rgb.pixels[3 * i + 1] + 0.114 * rgb.pixels[3 * i + 2];
    EXPECT_LE(std::abs(gray.pixels[i] - luma), 0.5 + 1e-3) << "pixel " << i;
  }
}

TEST(ImageFolderTest, AJpegDecodesToWithinAFewLevelsOfItsPixels) {
  // A smooth picture (JPEG's case), gray and RGB, at quality 100 with 4:4:4 sampling.
  for (const int64_t channels : {1, 3}) {
    Image image{16, 24, channels, {}};
    for (int64_t y = 0; y < 16; ++y) {
      for (int64_t x = 0; x < 24; ++x) {
        for (int64_t c = 0; c < channels; ++c) image.pixels.push_back(static_cast<uint8_t>(8 * y + 4 * x + 30 * c));
      }
    }
    const std::vector<uint8_t> jpeg = encode_jpeg(image, 100);
    const Image decoded = decode_image(jpeg.data(), jpeg.size(), channels);
    ASSERT_EQ(decoded.height, 16);
    ASSERT_EQ(decoded.width, 24);
    ASSERT_EQ(decoded.pixels.size(), image.pixels.size());
    int worst = 0;
    for (std::size_t i = 0; i < image.pixels.size(); ++i) worst = std::max(worst, std::abs(decoded.pixels[i] - image.pixels[i]));
    EXPECT_LE(worst, 3) << channels << " channels";
    // And PNG is lossless.
    const std::vector<uint8_t> png = encode_png(image);
    EXPECT_EQ(decode_image(png.data(), png.size(), channels).pixels, image.pixels);
  }
}

/// A PNG whose header says height x width pixels of gray, holding the pixel
/// data of a 1x1 image: what a decompression bomb looks like before its
/// pixels are read (its IHDR rewritten, CRC and all).
std::vector<uint8_t> png_claiming(uint32_t height, uint32_t width) {
  std::vector<uint8_t> png = encode_png(random_image(1, 1, 1, 7));
  // Signature (8 bytes), then IHDR: length (4), "IHDR" (4), width (4), height (4), ..., CRC (4) at 29.
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<uint8_t>(width >> (24 - 8 * i));
    png[20 + i] = static_cast<uint8_t>(height >> (24 - 8 * i));
  }
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), png.data() + 12, 17);
  for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  return png;
}

// 30000 x 30000 pixels decoded to RGB floats would ask for 10.8 GB: the
// header alone refuses it, before a pixel is allocated; the limit is
// Pillow's, and inclusive. Sizes read height x width, as data.size does.
TEST(ImageFolderTest, AnImageAboveThePixelLimitIsRefusedFromItsHeader) {
  const std::vector<uint8_t> bomb = png_claiming(30000, 30000), tall = png_claiming(30000, 7000);
  try {
    decode_image(bomb.data(), bomb.size(), 3);
    ADD_FAILURE() << "a 30000x30000 PNG decoded under the default limit";
  } catch (const ImageTooLargeError& error) {
    EXPECT_EQ(error.height, 30000);
    EXPECT_EQ(error.width, 30000);
    EXPECT_EQ(error.max_pixels, 2 * 89478485);
    EXPECT_NE(std::string(error.what()).find("is 30000x30000 pixels (900000000), above the limit of 178956970"),
              std::string::npos) << error.what();
  }
  try {
    decode_image(tall.data(), tall.size(), 1);
    ADD_FAILURE() << "a 30000x7000 PNG decoded under the default limit";
  } catch (const ImageTooLargeError& error) {
    EXPECT_EQ(error.height, 30000);
    EXPECT_EQ(error.width, 7000);
    EXPECT_NE(std::string(error.what()).find("is 30000x7000 pixels (210000000)"), std::string::npos) << error.what();
  }
  const Image image = random_image(5, 4, 3, 12);
  for (const auto& bytes : {encode_png(image), encode_jpeg(image, 90)}) {
    EXPECT_THROW(decode_image(bytes.data(), bytes.size(), 3, 19), ImageTooLargeError);
    EXPECT_EQ(decode_image(bytes.data(), bytes.size(), 3, 20).pixels.size(), 60u);  // 5 x 4 pixels: at the limit
  }
}

TEST(ImageFolderTest, DecodeThreadsChangeNoSampleAndNoOrder) {
  test::TempDir dir;
  for (int i = 0; i < 36; ++i) {
    const Image image = random_image(8, 8, 3, 100 + i);
    const std::string name = dir.file("train/c" + std::to_string(i % 3) + "/" + std::to_string(i));
    write_bytes(name + (i % 2 ? ".png" : ".jpg"), i % 2 ? encode_png(image) : encode_jpeg(image, 90));
  }
  const ImageFolderSplit one = read_image_folder(dir.file("train"), "data.train", transform(3), 1);
  const ImageFolderSplit three = read_image_folder(dir.file("train"), "data.train", transform(3), 3);
  EXPECT_EQ(one.data.size(), 36);
  EXPECT_TRUE(at::equal(one.data.inputs(), three.data.inputs()));
  EXPECT_TRUE(at::equal(one.data.targets(), three.data.targets()));
}

// Bilinear (align_corners false) from 4x4 to 2x2 samples between each 2x2
// block's pixels: each output is its block's mean.
TEST(ImageFolderTest, ResizingToHalfTheSideAveragesEachTwoByTwoBlock) {
  test::TempDir dir;
  const Image big = random_image(4, 4, 1, 7), small = random_image(2, 2, 1, 8);
  write_bytes(dir.file("train/a/big.png"), encode_png(big));
  write_bytes(dir.file("train/a/small.png"), encode_png(small));
  ImageTransform half = transform(1);
  half.height = half.width = 2;
  half.resize = true;
  const ImageFolderSplit split = read_image_folder(dir.file("train"), "data.train", half, 1);
  const at::Tensor expected = at::avg_pool2d(unit_pixels(big).unsqueeze(0), {2, 2}).squeeze(0);
  EXPECT_LE((split.data.inputs()[0].to(at::kDouble) - expected).abs().max().item<double>(), 1e-6);
  EXPECT_LE((split.data.inputs()[1].to(at::kDouble) - unit_pixels(small)).abs().max().item<double>(), 1e-7);
  // Without a size, another size than the first image's is refused, naming the file.
  const std::string error = test::config_error_of([&] { read_image_folder(dir.file("train"), "data.train", transform(1), 1); });
  EXPECT_NE(error.find("small.png' is 2x2, not 4x4"), std::string::npos) << error;
  EXPECT_NE(error.find("data.size"), std::string::npos) << error;
}

Json folder_config(const test::TempDir& dir) {
  Json config = test::smoke_config();
  config["data"] = {{"name", "image_folder"}, {"train", dir.file("images/train")}, {"test", dir.file("images/test")},
                    {"channels", 1}, {"batch_size", 16}};
  return config;
}

// The pipeline's rules hold as for any dataset: the same seed, subset and
// label noise give the same run.
TEST(ImageFolderTest, TheSameConfigTrainsTheSameWithSubsetAndLabelNoise) {
  test::TempDir dir;
  for (int i = 0; i < 60; ++i) {
    write_bytes(dir.file("images/" + std::string(i < 48 ? "train" : "test") + "/c" + std::to_string(i % 3) + "/" +
                         std::to_string(i) + ".png"),
                encode_png(random_image(6, 6, 1, 200 + i)));
  }
  Json config = folder_config(dir);
  config["data"]["train_subset"] = 40;
  config["data"]["label_noise"] = 0.2;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  Trainer first(config), second(config);
  EXPECT_EQ(first.state().train_size, 40);
  first.fit();
  second.fit();
  const auto a = first.whole_parameters(), b = second.whole_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
  Trainer untrained(config);
  EXPECT_FALSE(at::equal(a[0], untrained.model().parameters()[0])) << "training moved nothing";
  config["data"]["label_noise"] = 0;  // the noise changed labels: without it, another run
  Trainer clean(config);
  clean.fit();
  EXPECT_FALSE(at::equal(a[0], clean.whole_parameters()[0])) << "label_noise changed nothing";
}

// Python (Pillow) writes a folder of PNGs (gray, RGB, RGBA) and JPEGs (gray,
// RGB) of two sizes and reads it back as basin does (sorted classes and
// files, convert("L" or "RGB"), resize with interpolate, (x / 255 - mean) /
// std): the same samples bit for bit (to 1e-5 against another LibTorch's
// resize). basin trains the scripted BatchNorm CNN on it with SAM, in one
// process and on two ranks; Python's model.pt and state_dict.pt give
// bit-equal outputs and the reported accuracy.
TEST(ImageFolderTest, PythonReadsTheFolderAsBasinAndGetsBackTheModelTrainedOnIt) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  if (std::system("/usr/bin/python3 -c 'import PIL' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Python's Pillow is not installed (Debian package python3-pil)";
  }
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  test::write_text(dir.file("folder.py"), R"(import os, numpy, torch, PIL.Image
def per_channel(values):
    return torch.tensor(values, dtype=torch.float64).float().view(-1, 1, 1)
def write(root):
    rng = numpy.random.default_rng(0)
    w = rng.standard_normal((25, 3))
    for split, n in (('train', 192), ('test', 96)):
        for i in range(n):
            side = 5 if i % 4 else 6
            a = rng.integers(0, 256, (side, side), dtype=numpy.uint8)
            small = numpy.asarray(PIL.Image.fromarray(a).resize((5, 5)), dtype=numpy.float64).reshape(25)
            label = ('zebra', 'ant', 'moth')[int(numpy.argmax(small @ w))]
            os.makedirs(f'{root}/{split}/{label}', exist_ok=True)
            # Gray, RGB and (PNG only) RGBA files, which Pillow converts to gray as basin must.
            image = PIL.Image.fromarray(a)
            if i % 5 == 1:
                image = PIL.Image.fromarray(numpy.stack([a, a, numpy.minimum(a, 240) + 15], -1))
            if i % 5 == 2 and i % 3:
                image = PIL.Image.fromarray(numpy.stack([a, a, a, (a * 7) % 256], -1).astype(numpy.uint8), 'RGBA')
            image.save(f'{root}/{split}/{label}/{i:04d}' + ('.jpg' if i % 3 == 0 else '.png'), quality=95)
    os.makedirs(f'{root}/train/.ipynb_checkpoints', exist_ok=True)
    open(f'{root}/train/README.txt', 'w').write('not a class')
def read(root, mode='L', mean=(0.5,), std=(0.25,), train='images/train'):
    mean, std = per_channel(mean), per_channel(std)
    classes = sorted(d for d in os.listdir(train) if not d.startswith('.') and os.path.isdir(f'{train}/{d}'))
    xs, ys = [], []
    for label, c in enumerate(classes):
        if not os.path.isdir(f'{root}/{c}'):
            continue
        for f in sorted(os.listdir(f'{root}/{c}')):
            a = numpy.asarray(PIL.Image.open(f'{root}/{c}/{f}').convert(mode))
            x = torch.from_numpy(a.copy()).view(a.shape[0], a.shape[1], -1).permute(2, 0, 1).contiguous().float().div(255)
            x = torch.nn.functional.interpolate(x[None], size=(4, 4), mode='bilinear', align_corners=False)[0]
            xs.append((x - mean) / std)
            ys.append(label)
    return torch.stack(xs), torch.tensor(ys)
)");
  auto python = test::run_command("env -C " + dir.path().string() + " /usr/bin/python3 -c \"import folder; folder.write('images')\"");
  ASSERT_EQ(python.exit_code, 0) << python.output;

  Json config = test::python_model_config(dir, "net.pt");
  config["data"] = {{"name", "image_folder"}, {"train", dir.file("images/train")}, {"test", dir.file("images/test")},
                    {"channels", 1}, {"size", 4}, {"mean", 0.5}, {"std", 0.25}, {"batch_size", 16}};
  // The samples basin decodes, gray and RGB (per-channel mean and std), for Python to compare with its own.
  c10::Dict<std::string, at::Tensor> samples;
  for (const std::string mode : {"L", "RGB"}) {
    Json keys = config["data"];
    keys.erase("name");
    keys.erase("batch_size");  // the trainer's keys
    if (mode == "RGB") keys.update(Json{{"channels", 3}, {"mean", {0.5, 0.4, 0.3}}, {"std", {0.25, 0.2, 0.3}}});
    Params data(keys, "data");
    const DataSplits splits = std::move(*dataset_registry().create("image_folder", data, 0));
    samples.insert(mode + "_train_x", splits.train.inputs());
    samples.insert(mode + "_train_y", splits.train.targets());
    samples.insert(mode + "_test_x", splits.test.inputs());
    samples.insert(mode + "_test_y", splits.test.targets());
  }
  write_torch_save_file(dir.file("basin_samples.pt"), samples);
  // Bit for bit against the same LibTorch; another one's resize kernel may round the last bit
  // otherwise (PyPI's 2.11 against Debian's Python 1.13): then to 1e-5, and the accuracy to 3 samples in 96.
  python = test::run_command("/usr/bin/python3 -c \"import torch; print(torch.__version__)\"");
  const std::string version = compat::torch_version();
  const bool same_torch = python.output.rfind(version.substr(0, version.find('.', version.find('.') + 1)) + ".", 0) == 0;
  if (!same_torch) std::cout << "note: LibTorch " << version << " against Python's torch " << python.output;
  const std::string tolerances = same_torch ? " 0 1e-12" : " 1e-5 0.032";
  python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import sys, torch, folder\n"
      "basin = torch.load('basin_samples.pt', weights_only=True)\n"
      "for mode, mean, std in (('L', (0.5,), (0.25,)), ('RGB', (0.5, 0.4, 0.3), (0.25, 0.2, 0.3))):\n"
      "  for split in ('train', 'test'):\n"
      "    x, y = folder.read('images/' + split, mode, mean, std)\n"
      "    key = mode + '_' + split\n"
      "    assert torch.equal(y, basin[key + '_y']), (key, y, basin[key + '_y'])\n"
      "    assert (x - basin[key + '_x']).abs().max() <= float(sys.argv[1]), (key, (x - basin[key + '_x']).abs().max())\n"
      "print('python: the same samples')\"" + tolerances);
  ASSERT_EQ(python.exit_code, 0) << python.output;

  const std::string check =
      "import sys, json, torch, models, folder\n"
      "run = sys.argv[1]\n"
      "m = torch.jit.load(run + '/model.pt').eval()\n"
      "n = models.Net(); n.load_state_dict(torch.load(run + '/state_dict.pt', weights_only=True)); n.eval()\n"
      "x, y = folder.read('images/test')\n"
      "with torch.no_grad(): a, b = m(x), n(x)\n"
      "assert torch.equal(a, b), (a - b).abs().max()\n"
      "accuracy = (a.argmax(1) == y).double().mean().item()\n"
      "reported = json.load(open(run + '/summary.json'))['test_accuracy']\n"
      "assert abs(accuracy - reported) <= float(sys.argv[3]), (accuracy, reported)\n"
      "assert accuracy > 0.45, accuracy\n"
      "print('python: test accuracy', accuracy)";
  test::write_text(dir.file("check.py"), check);
  test::write_text(dir.file("config.json"), config.dump());
  auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("data.train: decoded 192 images"), std::string::npos) << run.output;
  python = test::run_command("env -C " + dir.path().string() + " /usr/bin/python3 check.py " + dir.file("run") + tolerances);
  EXPECT_EQ(python.exit_code, 0) << python.output;

  config["parallel"] = {{"mode", "ddp"}, {"timeout_seconds", 60}};
  test::write_text(dir.file("config.json"), config.dump());
  run = test::run_command(kRun + " --nproc 2 -- " + kTrain + " --config " + dir.file("config.json") + " --run-dir " +
                          dir.file("ddp"), 300);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  python = test::run_command("env -C " + dir.path().string() + " /usr/bin/python3 check.py " + dir.file("ddp") + tolerances);
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

TEST(ImageFolderTest, BadFoldersImagesAndKeysAreOneLineNamingTheKeyAndExitTwo) {
  test::TempDir dir;
  auto reset = [&] {
    fs::remove_all(dir.file("images"));
    for (int i = 0; i < 4; ++i) {
      write_bytes(dir.file("images/train/c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".png"),
                  encode_png(random_image(4, 4, 1, i)));
      write_bytes(dir.file("images/test/c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".png"),
                  encode_png(random_image(4, 4, 1, 10 + i)));
    }
  };
  struct Case {
    std::string what;
    std::function<void(Json&)> make;
    std::vector<std::string> says;
  };
  const Image big = random_image(5, 5, 1, 99);
  std::vector<uint8_t> truncated = encode_jpeg(random_image(16, 16, 3, 98), 90);
  truncated.resize(truncated.size() / 2);
  const std::vector<Case> cases = {
      {"an empty folder", [&](Json&) { fs::remove_all(dir.file("images/train")); fs::create_directories(dir.file("images/train")); },
       {"'data.train'", "images/train' holds no class folders"}},
      {"no folder", [&](Json& c) { c["data"]["train"] = dir.file("missing"); }, {"'data.train'", "missing' is not a folder"}},
      {"a class folder without images", [&](Json&) { fs::create_directories(dir.file("images/train/c2")); },
       {"'data.train'", "c2' holds no .png, .jpg or .jpeg file"}},
      {"an unreadable image", [&](Json&) { write_bytes(dir.file("images/train/c1/bad.png"), {'n', 'o', 't', ' ', 'a', 'n'}); },
       {"'data.train'", "c1/bad.png'", "neither a PNG nor a JPEG"}},
      {"a PNG cut short", [&](Json&) {
         auto png = encode_png(random_image(4, 4, 1, 5));
         png.resize(png.size() - 20);
         write_bytes(dir.file("images/test/c0/cut.png"), png);
       }, {"'data.test'", "c0/cut.png'", "libpng"}},
      {"a JPEG cut short", [&](Json&) { write_bytes(dir.file("images/train/c0/cut.jpg"), truncated); },
       {"'data.train'", "c0/cut.jpg'", "libjpeg-turbo"}},
      {"another size without data.size", [&](Json&) { write_bytes(dir.file("images/test/c1/big.png"), encode_png(big)); },
       {"'data.test'", "c1/big.png' is 5x5, not 4x4", "data.size"}},
      {"a PNG whose header says 30000x30000", [&](Json&) { write_bytes(dir.file("images/train/c1/bomb.png"), png_claiming(30000, 30000)); },
       {"'data.train'", "c1/bomb.png' is 30000x30000 pixels (900000000), above the limit of 178956970 pixels",
        "set data.max_pixels"}},
      {"an image above a lowered limit", [&](Json& c) { c["data"]["max_pixels"] = 15; }, {"'data.train'", "is 4x4 pixels (16)", "data.max_pixels"}},
      {"a limit that is no limit", [&](Json& c) { c["data"]["max_pixels"] = 0; }, {"'data.max_pixels'"}},
      {"a test class that training lacks", [&](Json&) { write_bytes(dir.file("images/test/c9/x.png"), encode_png(random_image(4, 4, 1, 3))); },
       {"'data.test'", "class folder 'c9' is not one of the training split's classes"}},
      {"one class", [&](Json&) { fs::remove_all(dir.file("images/train/c1")); }, {"'data.train'", "one class folder ('c0')"}},
      {"channels 2", [&](Json& c) { c["data"]["channels"] = 2; }, {"'data.channels'"}},
      {"a size that is no size", [&](Json& c) { c["data"]["size"] = "big"; }, {"'data.size'", "[height, width]"}},
      {"a mean per channel too many", [&](Json& c) { c["data"]["mean"] = {0.5, 0.5, 0.5}; }, {"'data.mean'", "a list of 1"}},
      {"a std of 0", [&](Json& c) { c["data"]["std"] = 0; }, {"'data.std'", "> 0"}},
  };
  for (const auto& c : cases) {
    reset();
    Json config = folder_config(dir);
    c.make(config);
    test::write_text(dir.file("config.json"), config.dump());
    const auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"));
    EXPECT_EQ(run.exit_code, 2) << c.what << "\n" << run.output;
    for (const auto& text : c.says) EXPECT_NE(run.output.find(text), std::string::npos) << c.what << ": no '" << text << "' in\n" << run.output;
    // One line of error, the last; before it at most the training split's decode line.
    const auto lines = test::lines_of(run.output);
    ASSERT_FALSE(lines.empty()) << c.what;
    EXPECT_EQ(lines.back().rfind("basin-train: config key", 0), 0u) << c.what << "\n" << run.output;
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_NE(lines[i].find("data.train: decoded"), std::string::npos) << c.what << "\n" << run.output;
  }
}

}  // namespace
}  // namespace basin
