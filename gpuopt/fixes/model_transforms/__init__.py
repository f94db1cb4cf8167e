"""The model transforms: amp, channels-last, compile."""
