/* simulate.c - placeholder while being written this session. */
#include "plan.h"
