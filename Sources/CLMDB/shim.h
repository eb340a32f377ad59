#ifndef EVSTORE_CLMDB_SHIM_H
#define EVSTORE_CLMDB_SHIM_H
#include <lmdb.h>
#endif
