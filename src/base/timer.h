/* Monotonic wall-clock time. */
#ifndef SUBQ_BASE_TIMER_H
#define SUBQ_BASE_TIMER_H
double time_now_s(void);
#endif
