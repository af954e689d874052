// The prelude: include this and `using namespace axonml::distributed;` to get
// every name of the API examples in README.md.
#pragma once

#include "axonml/distributed/arena_backend.hpp"
#include "axonml/distributed/backend.hpp"
#include "axonml/distributed/bucket.hpp"
#include "axonml/distributed/comm.hpp"
#include "axonml/distributed/ddp.hpp"
#include "axonml/distributed/dtype.hpp"
#include "axonml/distributed/error.hpp"
#include "axonml/distributed/grad_sync.hpp"
#include "axonml/distributed/mock_backend.hpp"
#include "axonml/distributed/process_group.hpp"
#include "axonml/distributed/shm_backend.hpp"
#include "axonml/distributed/store_backend.hpp"
#include "axonml/distributed/tensor.hpp"
#include "axonml/distributed/world.hpp"
