// Test double: see fake_api.h.
#include "include/api/fake_api.h"
