#ifndef CXS_TOOL_STATS_H
#define CXS_TOOL_STATS_H
typedef struct stats_opts {
    const char *html, *svg_dir, *compare; /* compare: the second dataset, or NULL */
    int json, scan;
    unsigned examples; /* utterances in the heatmap */
} stats_opts;
int stats_run(const char *dir, const stats_opts *o);
#endif
