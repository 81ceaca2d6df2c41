#ifndef JG_LISTENER_H
#define JG_LISTENER_H
#endif
