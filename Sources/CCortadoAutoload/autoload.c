/*
 * Swift has no code that runs when a module is loaded, and Core ML's API has no registration
 * call: `MLModel(contentsOf:)` must load any built-in kind in a program that only imported
 * Cortado. This constructor runs before main (for a static or a dynamic link alike) and only
 * stores a function pointer; the registry calls it on its first lookup, when the Swift runtime
 * is fully up, so no Swift code runs inside the constructor.
 */
#include "cortado_autoload.h"
#include "cortado_kinds_hook.h"

const int cortado_autoload_linked = 1;

__attribute__((constructor)) static void cortado_autoload(void) {
    cortado_set_builtin_kinds_loader(cortado_register_builtin_kinds);
}
