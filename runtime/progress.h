// Progress display for long work and plain log lines.
//
// On a terminal: one line redrawn in place (at most ~10 times a second) with
// the label, a bar, done/total, the rate, elapsed time, ETA and a caller's
// extra text ("loss 2.31 acc 41.2%"). In a log or pipe: no redraws, one plain
// line at most every `interval` seconds (10 by default) and one at the end.
// Quiet: nothing at all. No globals; one progress struct per task.
#ifndef SC_PROGRESS_H
#define SC_PROGRESS_H

#include <stdio.h>

typedef struct {
    FILE *f;           // where it draws (usually stderr)
    char label[64];    // "epoch 3/30"
    long total;        // items expected; <= 0 when unknown (no bar, no ETA)
    long done;         // items done at the last update
    long base;         // items done before this run (progress_resume): not in the rate
    int quiet;         // 1: print nothing
    int tty;           // 1: redraw in place; set by progress_start from isatty(), may be overridden
    double interval;   // seconds between plain lines when not a tty (default 10)
    double t0;         // start time (progress_clock seconds)
    double last;       // time of the last line or redraw
    int drawn;         // 1 while a tty line is on screen without its newline
    char extra[160];   // the caller's text of the last update
} progress;

// Monotonic time in seconds (CLOCK_MONOTONIC).
double progress_clock(void);

// Starts a display of `total` items (<= 0: unknown) labelled `label` on f.
void progress_start(progress *p, FILE *f, const char *label, long total, int quiet);

// Records that `done` items were finished before this run (a resumed task):
// they count in done/total but not in the rate or the ETA.
void progress_resume(progress *p, long done);

// Records that `done` items are finished; redraws when due. extra may be NULL.
void progress_update(progress *p, long done, const char *extra);

// Ends the display with a final line showing the last count, the rate and
// the time taken; extra (NULL: the last update's text) is added.
void progress_finish(progress *p, const char *extra);

// Seconds since progress_start.
double progress_elapsed(const progress *p);

// Prints a log line (a newline is added) to p's stream unless p is quiet; a
// tty progress line on screen is cleared first and redrawn after it.
void progress_log(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prints fmt plus a newline to f unless quiet, and flushes.
void log_line(FILE *f, int quiet, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Formats seconds as "m:ss" or "h:mm:ss" into out.
void progress_fmt_time(double s, char *out, size_t len);

#endif
