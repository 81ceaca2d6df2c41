#ifndef JG_SERVER_H
#define JG_SERVER_H
#endif
