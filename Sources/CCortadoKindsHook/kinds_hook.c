#include "cortado_kinds_hook.h"

/* Written once by a constructor, before main and before any thread; read after. */
static cortado_kinds_loader loader;

void cortado_set_builtin_kinds_loader(cortado_kinds_loader value) { loader = value; }

cortado_kinds_loader cortado_builtin_kinds_loader(void) { return loader; }
