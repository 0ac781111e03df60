#ifndef CORTADO_CLIBUV_SHIM_H
#define CORTADO_CLIBUV_SHIM_H
#include <uv.h>
#endif
