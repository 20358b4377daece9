# The seed how-to's tpu_workload.py (../shared/seeds/000_31c80408b02080e0.txt), unchanged: plain
# JAX with pathwaysutils, run against Loom's IFRT proxy (`loom up` starts one and prints these):
#   JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://127.0.0.1:29000 \
#   IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true python examples/proxy/tpu_workload.py
import jax
import jax.numpy as jnp
from jax import lax
import pathwaysutils
# Initialize the Pathways client
pathwaysutils.initialize()
# Discover all available TPU devices
devices = jax.devices()
print("Available devices:", len(devices))
print("Device details:", devices)
# Get the number of available devices
num_tpus = jax.device_count()
# Create input data
x = jnp.arange(num_tpus)
# Define a distributed computation
def distributed_sum(value):
    return lax.psum(1, "devices")
# Execute the computation across TPU devices
calculate = jax.pmap(
    distributed_sum,
    axis_name="devices"
)
result = calculate(x)
print("Distributed result:", result)
