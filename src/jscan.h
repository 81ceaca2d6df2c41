#ifndef JG_JSCAN_H
#define JG_JSCAN_H
#endif
