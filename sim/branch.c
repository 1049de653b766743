/*
 * branch.c - which driver branch this simulator library is: compiled once
 * per library with -DSIM_BRANCH=N (390, 470, ...) and -DSIM_BRANCHES="..."
 * (every simulated branch, oldest first), linked with the exports of that
 * branch (sim/driver-branches.txt).
 */
#include "nvml_sim.h"

const unsigned sim_branch = SIM_BRANCH;
const unsigned sim_branches[] = {SIM_BRANCHES, 0};
