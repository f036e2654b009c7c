/* decl_only.c - the declarations alone, in a second translation unit beside
 * the one that holds the implementation (and, compiled as C++, from C++). */
#include "pipedream.h"

int pd_test_decl_version(void);
int pd_test_decl_version(void) { return PD_VERSION_MAJOR * 10000 + PD_VERSION_MINOR * 100 + PD_VERSION_PATCH; }

/* every options initializer, as a user's C11 -pedantic or C++ compiler sees it */
int pd_test_decl_options(void);
int pd_test_decl_options(void) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
    pd_plan_options plo = PD_PLAN_OPTIONS_INIT;
    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    pd_trainer_options tro = PD_TRAINER_OPTIONS_INIT;
    return (int)(lo.size + eo.size + to.size + po.size + plo.size + so.size + tro.size + (tro.train == NULL));
}
