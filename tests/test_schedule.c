/* test_schedule.c - placeholder while being written this session. */
int main(void) { return 77; }
