#ifndef EVSTORE_CCRYPTO_SHIM_H
#define EVSTORE_CCRYPTO_SHIM_H
/* Only Ed25519 from raw keys is used (deriving an NKey's public key from its seed). */
#include <openssl/evp.h>
#endif
