#ifndef JG_JVALID_H
#define JG_JVALID_H
#endif
