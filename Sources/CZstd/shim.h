#ifndef EVSTORE_CZSTD_SHIM_H
#define EVSTORE_CZSTD_SHIM_H
// ZSTD_getCParams and ZSTD_createCDict_advanced, to size a digested dictionary's tables
// (exported by the shared library; their parameter struct has not changed since zstd 1.3).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
// ZDICT_trainFromBuffer_fastCover and its parameters (exported by the shared library too).
#define ZDICT_STATIC_LINKING_ONLY
#include <zdict.h>
#endif
