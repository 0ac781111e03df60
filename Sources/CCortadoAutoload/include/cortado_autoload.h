#ifndef CORTADO_AUTOLOAD_H
#define CORTADO_AUTOLOAD_H

/* Defined in Swift (Sources/Cortado, @_cdecl): registers every built-in model kind. */
void cortado_register_builtin_kinds(void);

/* Referenced by the Cortado module so that a linker never drops this file's constructor. */
extern const int cortado_autoload_linked;

#endif
