#ifndef EVSTORE_CZSTD_SHIM_H
#define EVSTORE_CZSTD_SHIM_H
#include <zstd.h>
// ZDICT_trainFromBuffer_fastCover and its parameters (exported by the shared library too).
#define ZDICT_STATIC_LINKING_ONLY
#include <zdict.h>
#endif
