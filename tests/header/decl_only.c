/* decl_only.c - the declarations alone, in a second translation unit beside
 * the one that holds the implementation (and, compiled as C++, from C++). */
#include "pipedream.h"

int pd_test_decl_version(void);
int pd_test_decl_version(void) { return PD_VERSION_MAJOR * 10000 + PD_VERSION_MINOR * 100 + PD_VERSION_PATCH; }
