// Reads float32 values (raw, little-endian) from argv[1] and writes their
// bfloat16 and float16 bits (argv[2], argv[3]); then writes the float32
// value of every 16-bit pattern in both formats (argv[4], argv[5]).
#include "mtc/runtime/Half.h"

#include <cstdio>
#include <vector>

using namespace mtc::rt;

int main(int argc, char **argv) {
  if (argc != 6)
    return 2;
  std::FILE *in = std::fopen(argv[1], "rb");
  if (!in)
    return 1;
  std::vector<float> values;
  float v;
  while (std::fread(&v, sizeof v, 1, in) == 1)
    values.push_back(v);
  std::fclose(in);
  std::vector<uint16_t> bf16, fp16;
  for (float f : values) {
    bf16.push_back(floatToBf16(f));
    fp16.push_back(floatToHalf(f));
  }
  std::vector<float> fromBf16, fromFp16;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    fromBf16.push_back(bf16ToFloat(static_cast<uint16_t>(h)));
    fromFp16.push_back(halfToFloat(static_cast<uint16_t>(h)));
  }
  auto write = [](const char *path, const void *data, size_t bytes) {
    std::FILE *out = std::fopen(path, "wb");
    return out && std::fwrite(data, 1, bytes, out) == bytes &&
           std::fclose(out) == 0;
  };
  bool ok = write(argv[2], bf16.data(), bf16.size() * 2) &&
            write(argv[3], fp16.data(), fp16.size() * 2) &&
            write(argv[4], fromBf16.data(), fromBf16.size() * 4) &&
            write(argv[5], fromFp16.data(), fromFp16.size() * 4);
  return ok ? 0 : 1;
}
