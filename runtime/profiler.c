/* profiler.c - placeholder while being written this session. */
#include "../core/plan.h"
