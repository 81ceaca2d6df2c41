/* systemd's readiness protocol: state lines sent as datagrams to $NOTIFY_SOCKET. */
#ifndef JG_NOTIFY_H
#define JG_NOTIFY_H

/* Open the socket named by $NOTIFY_SOCKET, if any ("@name" is in the abstract namespace).
 * Call before dropping privileges; 0, or -1 when the variable is set but unusable. */
int notify_init(void);
/* Send "READY=1", "RELOADING=1", "STOPPING=1"...; nothing happens without a socket. */
void notify_send(const char *state);
/* Announce a reload: RELOADING=1 with the monotonic time systemd asks for. */
void notify_reloading(void);
void notify_close(void);

#endif
