#ifndef CBEACON_ACCEPT_GUARD_H
#define CBEACON_ACCEPT_GUARD_H

/// Holds one descriptor in reserve for the moment the process's descriptor table is full (once).
void beacon_accept_guard_arm(void);

/// Connections refused at accept because the descriptor table was full, since start.
unsigned long beacon_accept_guard_refused(void);

#endif
