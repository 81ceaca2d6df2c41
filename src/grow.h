/* Growing an array by doubling: the one helper the engine's scratch arrays share. */
#ifndef JG_GROW_H
#define JG_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Room for need elements of elsize bytes in *arrp (capacity *cap), doubling from first:
 * 0, or -1 without memory (the array is left as it was). */
static inline int
grow_array(void *arrp, size_t *cap, size_t need, size_t elsize, size_t first)
{
	void **arr = arrp, *p;
	size_t n = *cap != 0 ? *cap : first;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	if ((p = realloc(*arr, n * elsize)) == NULL)
		return -1;
	*arr = p;
	*cap = n;
	return 0;
}

#endif
