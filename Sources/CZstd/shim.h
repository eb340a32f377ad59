#ifndef EVSTORE_CZSTD_SHIM_H
#define EVSTORE_CZSTD_SHIM_H
#include <zstd.h>
#include <zdict.h>
#endif
