#ifndef JG_PROXY_H
#define JG_PROXY_H
#endif
