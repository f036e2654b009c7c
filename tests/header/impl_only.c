/* impl_only.c - the implementation translation unit of use.cpp. */
#define PIPEDREAM_IMPLEMENTATION
#include "pipedream.h"
