#ifndef EVSTORE_CNATS_SHIM_H
#define EVSTORE_CNATS_SHIM_H
#include <nats/nats.h>
#endif
