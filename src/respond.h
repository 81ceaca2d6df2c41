#ifndef JG_RESPOND_H
#define JG_RESPOND_H
#endif
