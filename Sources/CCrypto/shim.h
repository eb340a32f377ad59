#ifndef EVSTORE_CCRYPTO_SHIM_H
#define EVSTORE_CCRYPTO_SHIM_H
/* Ed25519 from raw keys (deriving an NKey's public key from its seed) and the one-shot
   SHA-256 digest and its streaming form (the store's content hashes, blobs). */
#include <openssl/evp.h>
#endif
