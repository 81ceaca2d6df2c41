#ifndef JG_ENVELOPE_H
#define JG_ENVELOPE_H
#endif
