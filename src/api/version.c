/* subq_version: the version of the library linked in (subq.h). */
#include "subq.h"

const char *subq_version(void) { return SUBQ_VERSION; }
