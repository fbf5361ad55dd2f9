"""The library half of predicting (what mpinn.api, mpinn.sklearn and the predict command use): a model file loaded
and checked, data read as the model's training data was (load), and the predictions with their metrics (score)."""
