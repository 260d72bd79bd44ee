#ifndef CBEACON_ZMQ_SHIM_H
#define CBEACON_ZMQ_SHIM_H
#include <zmq.h>
#endif
