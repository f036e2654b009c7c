/* test_plan.c - placeholder while being written this session. */
int main(void) { return 77; }
