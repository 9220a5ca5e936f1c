"""What the code under test is judged against: Hugging Face's float64 model, the sampling oracle, plain references, tolerances."""
