#ifndef CORTADO_CHTTPPARSER_SHIM_H
#define CORTADO_CHTTPPARSER_SHIM_H
#include <http_parser.h>

/* The parser's read-only results live in bit-fields; these read them without relying on how
   Swift imports bit-fields. */
static inline unsigned cortado_http_errno(const http_parser *p) { return p->http_errno; }
static inline unsigned cortado_http_method(const http_parser *p) { return p->method; }
static inline int cortado_http_upgrade(const http_parser *p) { return p->upgrade; }
#endif
