// .npy reading and writing: round trips, and every malformed file refused with its name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kattn/core/storage.hpp"
#include "kattn/errors.hpp"
#include "kattn/io/npy.hpp"

namespace kattn {
namespace io {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kattn_" + name; }

// An .npy image with the given header dict and payload, format 1.0.
std::vector<unsigned char> image(const std::string& dict, std::size_t payload_bytes, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<unsigned char> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const std::size_t n = header.size();
  out.push_back(n & 0xff);
  out.push_back((n >> 8) & 0xff);
  if (major != 1) {
    out.push_back((n >> 16) & 0xff);
    out.push_back((n >> 24) & 0xff);
  }
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + payload_bytes, 0);
  return out;
}

void expect_refused(const std::vector<unsigned char>& img, const std::string& fragment) {
  try {
    parse_npy(img.data(), img.size(), "x.npy");
    ADD_FAILURE() << "expected a kattn::Error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("x.npy"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  const std::vector<std::vector<std::int64_t>> shapes = {{}, {5}, {2, 3}, {2, 0, 4}, {1, 2, 3, 4}};
  for (const auto& shape : shapes) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<double> d(n);
    for (std::int64_t i = 0; i < n; ++i) d[i] = 0.25 * i - 3;
    write_npy(temp_path("d.npy"), shape, d);
    const NpyArray a = read_npy(temp_path("d.npy"));
    EXPECT_EQ(a.dtype, DType::f64);
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.values<double>(), d);

    std::vector<float> f(d.begin(), d.end());
    write_npy(temp_path("f.npy"), shape, f);
    EXPECT_EQ(read_npy(temp_path("f.npy")).values<float>(), f);

    std::vector<std::int32_t> i32(n);
    std::vector<std::int64_t> i64(n);
    for (std::int64_t i = 0; i < n; ++i) i32[i] = static_cast<std::int32_t>(i * 7 - 5), i64[i] = (i << 33) - 1;
    write_npy(temp_path("i.npy"), shape, i32);
    write_npy(temp_path("l.npy"), shape, i64);
    const NpyArray ai = read_npy(temp_path("i.npy"));
    EXPECT_EQ(ai.dtype, DType::i32);
    EXPECT_EQ(ai.values<std::int64_t>(), std::vector<std::int64_t>(i32.begin(), i32.end()));
    EXPECT_EQ(read_npy(temp_path("l.npy")).values<std::int64_t>(), i64);
  }
}

// The header alone (for reading rows in place): what the whole-file reader says, the data offset,
// and the same refusals, found from the file's size without reading its data.
TEST(Npy, ReadsTheHeaderAlone) {
  const std::vector<double> d = {1, 2, 3, 4, 5, 6};
  write_npy(temp_path("hd.npy"), {2, 3}, d);
  const NpyHeader h = read_npy_header(temp_path("hd.npy"));
  EXPECT_EQ(h.dtype, DType::f64);
  EXPECT_EQ(h.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(h.data_offset, npy_prefix(DType::f64, {2, 3}).size());
  EXPECT_EQ(h.data_offset % 64, 0u);
  std::vector<unsigned char> truncated = image("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8);
  std::ofstream(temp_path("ht.npy"), std::ios::binary)
      .write(reinterpret_cast<const char*>(truncated.data()), static_cast<std::streamsize>(truncated.size()));
  try {
    read_npy_header(temp_path("ht.npy"));
    ADD_FAILURE() << "expected a truncated-data error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated data"), std::string::npos) << e.what();
  }
}

TEST(Npy, ReadsFormatVersionsTwoAndThree) {
  for (int major : {2, 3}) {
    auto img = image("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12, major);
    const NpyArray a = parse_npy(img.data(), img.size(), "v.npy");
    EXPECT_EQ(a.shape, std::vector<std::int64_t>{3});
  }
}

// float16 ('<f2') as IEEE binary16, uint16 ('<u2') as bf16 bit patterns (npy.hpp's convention).
TEST(Npy, ReadsFloat16AndBf16BitsExactly) {
  auto h = image("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", 8);
  auto b = image("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2), }", 8);
  // 1.0, -2.5, 65504 (largest finite), 2^-24 (smallest subnormal); 1.0, -2.5, 3.140625, -inf.
  const unsigned char h_bits[8] = {0x00, 0x3c, 0x00, 0xc1, 0xff, 0x7b, 0x01, 0x00};
  const unsigned char b_bits[8] = {0x80, 0x3f, 0x20, 0xc0, 0x49, 0x40, 0x80, 0xff};
  std::copy(h_bits, h_bits + 8, h.end() - 8);
  std::copy(b_bits, b_bits + 8, b.end() - 8);
  const NpyArray ah = parse_npy(h.data(), h.size(), "h.npy"), ab = parse_npy(b.data(), b.size(), "b.npy");
  EXPECT_EQ(ah.dtype, DType::f16);
  EXPECT_EQ(ab.dtype, DType::bf16);
  EXPECT_TRUE(ah.is_16bit() && ab.is_16bit() && !ah.is_floating() && !ab.is_integer());
  EXPECT_EQ(ah.values<double>(), (std::vector<double>{1.0, -2.5, 65504.0, std::ldexp(1.0, -24)}));
  EXPECT_EQ(ab.values<float>(), (std::vector<float>{1.0f, -2.5f, 3.140625f, -INFINITY}));
}

TEST(Npy, WritesFloat16AndBf16Bits) {
  const std::vector<fp16> h = {fp16{0x3c00}, fp16{0xc100}, fp16{0x7e00}};
  const std::vector<bf16> b = {bf16{0x3f80}, bf16{0xc020}, bf16{0x0001}, bf16{0x7f80}};
  write_npy(temp_path("h.npy"), {3}, h);
  write_npy(temp_path("b.npy"), {2, 2}, b);
  const NpyArray ah = read_npy(temp_path("h.npy")), ab = read_npy(temp_path("b.npy"));
  EXPECT_EQ(ah.dtype, DType::f16);
  EXPECT_EQ(ab.dtype, DType::bf16);
  EXPECT_EQ(ab.shape, (std::vector<std::int64_t>{2, 2}));
  // The bytes as written: little-endian bit patterns, NaN's payload kept.
  EXPECT_EQ(ah.bytes, (std::vector<unsigned char>{0x00, 0x3c, 0x00, 0xc1, 0x00, 0x7e}));
  EXPECT_EQ(ab.bytes, (std::vector<unsigned char>{0x80, 0x3f, 0x20, 0xc0, 0x01, 0x00, 0x80, 0x7f}));
  std::ifstream in(temp_path("h.npy"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("'descr': '<f2'"), std::string::npos);
}

TEST(Npy, AcceptsBooleanArrays) {
  auto img = image("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }", 4);
  img[img.size() - 1] = 1;
  const NpyArray a = parse_npy(img.data(), img.size(), "b.npy");
  EXPECT_EQ(a.values<std::int64_t>(), (std::vector<std::int64_t>{0, 0, 0, 1}));
}

TEST(Npy, RefusesMalformedFiles) {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_NO_THROW(parse_npy(image(ok, 24).data(), image(ok, 24).size(), "x.npy"));
  auto bad_magic = image(ok, 24);
  bad_magic[1] = 'X';
  expect_refused(bad_magic, "not an .npy file");
  expect_refused({0x93, 'N', 'U'}, "not an .npy file");
  auto bad_version = image(ok, 24);
  bad_version[6] = 7;
  expect_refused(bad_version, "version 7");
  expect_refused(image("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24), "big-endian");
  expect_refused(image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), "Fortran-order");
  expect_refused(image("{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", 24), "unsupported dtype");
  expect_refused(image("{'descr': '>f2', 'fortran_order': False, 'shape': (2, 3), }", 12), "big-endian");
  expect_refused(image("{'descr': '>u2', 'fortran_order': False, 'shape': (2, 3), }", 12), "big-endian");
  expect_refused(image("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }", 12), "unsupported dtype");
  expect_refused(image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 11), "truncated data");
  expect_refused(image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 24), "unexpected bytes");
  expect_refused(image("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }", 6), "truncated data");
  expect_refused(image("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }", 13), "unexpected bytes");
  expect_refused(image("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", 48), "unsupported dtype");
  expect_refused(image(ok, 23), "truncated data");
  expect_refused(image(ok, 25), "unexpected bytes");
  expect_refused(image("{'fortran_order': False, 'shape': (2, 3), }", 24), "'descr'");
  expect_refused(image("{'descr': '<f4', 'shape': (2, 3), }", 24), "'fortran_order'");
  expect_refused(image("{'descr': '<f4', 'fortran_order': False, }", 24), "'shape'");
  expect_refused(image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 24), "malformed shape");
  expect_refused(image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 24), "malformed shape");
  expect_refused(image("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24), "malformed shape");
  expect_refused(image("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 24),
                 "too large");
  expect_refused(image("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", 24),
                 "too large");
  auto truncated_header = image(ok, 0);
  truncated_header.resize(30);
  expect_refused(truncated_header, "truncated .npy header");
  expect_refused(image("'descr' '<f4'", 0), "no dict");
}

TEST(Npy, MissingFileNamesThePath) {
  try {
    read_npy("/nonexistent/q.npy");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/q.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace io
}  // namespace kattn
