/* placeholder: replaced by the module's tests */
#include <check.h>
#include <stdlib.h>
int main(void) { return EXIT_FAILURE; }
