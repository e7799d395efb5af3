// The --kokkos-* arguments: kept out of kattn's own --help (shown by --kokkos-help), and the
// thread flag taken in both spellings (--kokkos-threads before Kokkos 3.7, --kokkos-num-threads
// since) whatever Kokkos this was built with.
#pragma once

#include <string>
#include <vector>

namespace kattn {
namespace cli {

// argv for Kokkos::initialize: without --help / -h (kattn's help only), and with
// --kokkos-threads=N spelled --kokkos-num-threads=N for Kokkos 3.7 and later; null-terminated,
// the strings live until exit.
std::vector<char*> kokkos_arguments(int argc, char* argv[]);

// Whether any argument asks for Kokkos' own help (--kokkos-help): Kokkos prints it on initialize.
bool wants_kokkos_help(int argc, char* argv[]);

// Whether the command line asks for kattn's help (kattn --help, kattn -h, kattn CMD --help):
// Kokkos' help flag --help must then not reach Kokkos, which would print its own first.
bool wants_kattn_help(int argc, char* argv[]);

}  // namespace cli
}  // namespace kattn
