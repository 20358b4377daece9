# The seed how-to's tpu_workload.py (../shared/seeds/000_31c80408b02080e0.txt) on a Loom cluster.
# The only change: the two pathwaysutils lines became loom's. Run it against the local cluster:
#   loom up --detach && python examples/tpu_workload.py && loom down
import jax
import jax.numpy as jnp
from jax import lax
import loom.jax

# Initialize the Loom client
loom.jax.initialize()

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
