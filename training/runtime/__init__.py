"""Process and backend plumbing, apart from what a run trains: which devices and processes
a run uses (`distribute`, one module per engine), the backend and the versions a run records
(`backend`), TensorFlow imported only where it is needed (`tensorflow_on_demand`), JAX's
compilation cache (`jax_cache`), TensorFlow's gradient registry between trials
(`tf_gradient_registry`), and the one door to other libraries' private code (`private_api`).
"""
