#ifndef CORTADO_COPENSSL_SHIM_H
#define CORTADO_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/pem.h>
#include <openssl/crypto.h>

// OpenSSL spells these as function-like macros, which Swift cannot call: one inline function each.

static inline int cortado_ssl_ctx_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

/// HTTP/2 forbids TLS compression and renegotiation (RFC 9113 §9.2.1); the server picks the cipher.
static inline void cortado_ssl_ctx_set_http2_options(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
}

static inline long cortado_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

/// An empty memory BIO reports "retry" (not end of file): more bytes may come from the socket.
static inline void cortado_bio_set_mem_eof_retry(BIO *bio) {
    BIO_set_mem_eof_return(bio, -1);
}

static inline int cortado_bio_pending(BIO *bio) {
    return BIO_pending(bio);
}

static inline int cortado_ssl_set_app_data(SSL *ssl, void *data) {
    return SSL_set_app_data(ssl, data);
}

static inline void *cortado_ssl_get_app_data(const SSL *ssl) {
    return SSL_get_app_data(ssl);
}

#endif
