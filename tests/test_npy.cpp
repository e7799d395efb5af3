// .npy reading and writing: round trips, and every malformed file refused with its name.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

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

TEST(Npy, ReadsFormatVersionsTwoAndThree) {
  for (int major : {2, 3}) {
    auto img = image("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12, major);
    const NpyArray a = parse_npy(img.data(), img.size(), "v.npy");
    EXPECT_EQ(a.shape, std::vector<std::int64_t>{3});
  }
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
  expect_refused(image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 12), "unsupported dtype");
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
