"""Small HotpotQA-format records shared by the long-context QA tests."""

RECORDS = [
    {
        "_id": "q1",
        "question": "Which city has the Eiffel Tower?",
        "answer": "Paris",
        "type": "bridge",
        "level": "easy",
        "supporting_facts": [["Paris", 0], ["Eiffel Tower", 1]],
        "context": [
            ["Lyon", ["Lyon is a city in France.", "It is known for food."]],
            ["Paris", ["Paris is the capital of France.", "Paris has many museums."]],
            ["Eiffel Tower", ["It is a tall iron tower.", "The tower stands in Paris."]],
        ],
    },
    {
        "_id": "q2",
        "question": "Is Lyon a city?",
        "answer": "yes",
        "type": "comparison",
        "level": "medium",
        "supporting_facts": [["Lyon", 0]],
        "context": [["Lyon", ["Lyon is a city in France.", "It is known for food."]], ["Paris", ["Paris is big."]]],
    },
    {
        "_id": "q3",
        "question": "Was the tower built in Lyon?",
        "answer": "no",
        "type": "comparison",
        "level": "hard",
        "supporting_facts": [["Eiffel Tower", 0], ["Lyon", 1]],
        "context": [["Lyon", ["Lyon is a city.", "It has no tower."]], ["Eiffel Tower", ["The tower is in Paris."]]],
    },
]
