#ifndef CORTADO_KINDS_HOOK_H
#define CORTADO_KINDS_HOOK_H

/*
 * How the core's kind registry finds the built-in kinds without naming them: a module that
 * links them (Cortado) stores a function here before main runs, and the registry calls it
 * once, on its first lookup. Null when no such module is linked.
 */
typedef void (*cortado_kinds_loader)(void);

void cortado_set_builtin_kinds_loader(cortado_kinds_loader loader);
cortado_kinds_loader cortado_builtin_kinds_loader(void);

#endif
