#pragma once
/// @file export.hpp
/// @brief Symbol visibility: libncclpool is built with hidden visibility; only the public API is exported.

#if defined(__GNUC__)
#define NCCLPOOL_API __attribute__((visibility("default")))
#else
#define NCCLPOOL_API
#endif
