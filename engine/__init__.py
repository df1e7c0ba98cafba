"""Inference Lab's engine: loading, generation, measurement, calculators. No Streamlit below this line."""
