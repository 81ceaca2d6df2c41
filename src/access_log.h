#ifndef JG_ACCESS_LOG_H
#define JG_ACCESS_LOG_H
#endif
