// Runtime values to template arguments in one place (FlashInfer's DISPATCH idea).
// The default case returns cudaErrorInvalidValue; callers validate first, so reaching
// it means a validation bug, and the error says so to the caller.
#pragma once

#define KATTN_DISPATCH_BOOL(cond, NAME, ...) \
  [&]() -> cudaError_t {                     \
    if (cond) {                              \
      constexpr bool NAME = true;            \
      return __VA_ARGS__();                  \
    } else {                                 \
      constexpr bool NAME = false;           \
      return __VA_ARGS__();                  \
    }                                        \
  }()

#define KATTN_DISPATCH_HEAD_DIM(d, NAME, ...) \
  [&]() -> cudaError_t {                      \
    switch (d) {                              \
      case 64: {                              \
        constexpr int NAME = 64;              \
        return __VA_ARGS__();                 \
      }                                       \
      case 128: {                             \
        constexpr int NAME = 128;             \
        return __VA_ARGS__();                 \
      }                                       \
      case 256: {                             \
        constexpr int NAME = 256;             \
        return __VA_ARGS__();                 \
      }                                       \
      default:                                \
        return cudaErrorInvalidValue;         \
    }                                         \
  }()
