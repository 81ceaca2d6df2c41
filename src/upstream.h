#ifndef JG_UPSTREAM_H
#define JG_UPSTREAM_H
#endif
