#pragma once
/// \file
/// The rendezvous key-value store: a small TCP server run by rank 0, and the client every rank uses
/// to publish and look up addresses.
///
/// Operations: set(key, value); get(key) (waits until the key exists); add(key, delta) (atomic
/// counter, returns the new value); wait(keys) (until all exist); check(key); get_many(keys) (the
/// values of several keys, waiting for all, in one round trip: set-up reads every rank's record so). Every blocking call
/// has a deadline, enforced by the server (it answers "timeout") and by the client (which gives up
/// if no answer comes).
///
/// The store, by concern:
///   bootstrap/store_protocol.hpp  the wire protocol: codes, framing, bounded request decoding
///   bootstrap/store_server.hpp    `store_server`: the listener and Asio loop run by rank 0
///   bootstrap/store_client.hpp    `store_client`: a rank's connection and its calls
/// This header includes all three.
///
/// Every connection starts with the job-key handshake of bootstrap/auth.hpp: the server answers no
/// request before the client has proved the key, drops a client that fails it or stays silent for
/// 10 s, and logs why; the client checks the server's proof before its first request.

#include "gsync/bootstrap/store_client.hpp"
#include "gsync/bootstrap/store_protocol.hpp"
#include "gsync/bootstrap/store_server.hpp"
