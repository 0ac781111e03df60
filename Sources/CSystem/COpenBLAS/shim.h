// OpenBLAS (Debian's pthread build): the CBLAS interface and the thread-count controls.
#include <cblas.h>
